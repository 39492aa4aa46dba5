"""CUDA graphs with gpumem as PyTorch's allocator (GPU and PyTorch; skipped elsewhere; one interpreter per case):
torch.cuda.graph captures into gpumem's private pools, whose memory eager tensors never reuse; pools shared with
pool=; memory given back when the graphs go; make_graphed_callables; torch.compile(mode="reduce-overhead") with
inductor's CUDA graph trees off (the default) and PyTorch's own error with them kept."""

import pytest

from torch_gpu_script import require_torch_on_gpu, run_torch


@pytest.fixture(autouse=True)
def torch_on_gpu():
    require_torch_on_gpu()


MODEL = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
static_in = torch.randn(32, 64, device="cuda")

side = torch.cuda.Stream()  # warm-up and capture stream: its cuBLAS workspace is allocated before the capture

def warm_up():
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)

def pools():
    return gpumem._gpumem._torch_private_pools()
"""


def test_replays_of_a_captured_forward_equal_eager_and_eager_tensors_stay_intact():
    run_torch(setup=MODEL, script="""
        warm_up()
        g = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g, stream=side):
            static_out = model(static_in)
        assert len(pools()) == 1 and pools()[0]["physical_bytes"] > 0, pools()
        # Allocated after the capture, in the sizes the capture freed: never from the graph's pool.
        kept = [torch.full((32, 256), 3.0, device="cuda") for _ in range(4)]
        kept += [torch.full((32, 10), 5.0, device="cuda") for _ in range(4)]
        for _ in range(3):
            data = torch.randn(32, 64, device="cuda")
            static_in.copy_(data)
            g.replay()
            with torch.no_grad():
                expected = model(data)
            torch.testing.assert_close(static_out, expected)
        torch.cuda.synchronize()
        for t in kept:
            assert torch.all(t == t.flatten()[0]) and t.flatten()[0].item() in (3.0, 5.0), "a replay wrote it"
        print("ok")
    """)


def test_two_graphs_share_a_pool_and_the_memory_goes_back_when_they_go():
    run_torch(setup=MODEL, script="""
        warm_up()
        g1 = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g1, stream=side):
            out1 = model(static_in)
        g2 = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g2, pool=g1.pool(), stream=side):
            big = torch.ones(64 << 20, device="cuda")  # 256 MiB in the shared pool
            out2 = out1 * 2 + big[:10]
        assert len(pools()) == 1 and pools()[0]["use_count"] == 2, pools()
        data = torch.randn(32, 64, device="cuda")
        static_in.copy_(data)
        g1.replay()
        g2.replay()
        with torch.no_grad():
            torch.testing.assert_close(out2, model(data) * 2 + 1)
        torch.cuda.synchronize()
        held = pools()[0]["physical_bytes"]
        assert held >= 256 << 20, held
        free_before = torch.cuda.mem_get_info()[0]
        del g1, g2, out1, out2, big
        gc.collect()
        torch.cuda.empty_cache()
        gpumem._gpumem._torch_release_idle_pools()
        assert all(p["use_count"] == 0 for p in pools()), pools()
        free_after = torch.cuda.mem_get_info()[0]
        assert free_after - free_before >= held // 2, (free_before, free_after, held)
        print("ok")
    """)


def test_make_graphed_callables_trains_as_eager():
    run_torch("""
        import copy
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
        reference = copy.deepcopy(model)
        graphed = torch.cuda.make_graphed_callables(model, (torch.randn(16, 64, device="cuda"),))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        for _ in range(4):
            data = torch.randn(16, 64, device="cuda")
            target = torch.randint(0, 10, (16,), device="cuda")
            losses = []
            for module, opt in ((graphed, optimizer), (reference, reference_optimizer)):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(module(data), target)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
        assert len(gpumem._gpumem._torch_private_pools()) >= 1
        print("ok")
    """)


def test_compile_reduce_overhead_equals_eager_through_cuda_graphs():
    run_torch("""
        import torch._inductor.config as inductor_config
        from torch._dynamo.utils import counters
        assert inductor_config.triton.cudagraph_trees is False, "gpumem turns the trees off by default"
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
        compiled = torch.compile(model, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(5):
                data = torch.randn(32, 64, device="cuda")
                out = compiled(data)
                torch.testing.assert_close(out, model(data))
        torch.cuda.synchronize()
        assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
        pools = gpumem._gpumem._torch_private_pools()
        assert pools, "no capture allocated from a private pool: CUDA graphs were not used"
        print("ok")
    """)


def test_compile_reduce_overhead_with_cudagraph_trees_kept_fails_with_pytorchs_error():
    result = run_torch("""
        import torch._inductor.config as inductor_config
        assert inductor_config.triton.cudagraph_trees is True
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
        compiled = torch.compile(model, mode="reduce-overhead")
        try:
            with torch.no_grad():
                for _ in range(5):
                    compiled(torch.randn(32, 64, device="cuda"))
        except RuntimeError as error:
            print("raised:", str(error).splitlines()[0] if str(error) else repr(error))
            assert "does not yet support" in str(error), str(error)
        else:
            raise AssertionError("reduce-overhead with cudagraph trees ran on a pluggable allocator")
        print("ok")
    """, conf="cudagraph_trees:keep")
    assert "raised:" in result.stdout
