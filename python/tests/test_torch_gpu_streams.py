"""Tensor.record_stream with gpumem as PyTorch's allocator (GPU and PyTorch; skipped elsewhere; one interpreter per
case): the memory of a tensor used on a second stream is not handed out again before that stream's work is done, and
GPUMEM_TORCH_ALLOC_CONF=record_stream:error makes record_stream raise."""

import pytest

from torch_gpu_script import require_torch_on_gpu, run_torch


@pytest.fixture(autouse=True)
def torch_on_gpu():
    require_torch_on_gpu()


def test_a_tensor_used_on_another_stream_is_not_reused_before_that_stream_is_done():
    run_torch("""
        n = 1 << 24
        s0 = torch.cuda.current_stream()
        s1 = torch.cuda.Stream()
        x = torch.arange(n, device="cuda", dtype=torch.float32)
        original = x.clone()
        s1.wait_stream(s0)
        with torch.cuda.stream(s1):
            torch.cuda._sleep(int(2e9))  # about a second: s1 reads x long after s0 has moved on
            y = x * 2
        x.record_stream(s1)
        address = x.data_ptr()
        del x
        z = torch.full((n,), 7.0, device="cuda")  # on s0, the size of x: its block when free
        torch.cuda.synchronize()
        assert torch.equal(y, original * 2), "s1 read memory that s0 had overwritten"
        assert torch.all(z == 7.0)
        print("reused x's block" if z.data_ptr() == address else "another block")
        print("ok")
    """)


def test_record_stream_error_mode_raises_a_runtime_error_naming_gpumem():
    run_torch("""
        s1 = torch.cuda.Stream()
        x = torch.ones(1024, device="cuda")
        try:
            x.record_stream(s1)
        except RuntimeError as error:
            text = str(error)
            assert "gpumem" in text and "record_stream:error" in text, text
        else:
            raise AssertionError("record_stream did not raise")
        torch.cuda.synchronize()
        print("ok")
    """, conf="record_stream:error")
