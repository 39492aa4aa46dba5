"""Real PyTorch programs whose device allocations make the replay logs of docs/PERFORMANCE.md ("Fragmentation").

    python3 pytorch_programs.py PROGRAM --allocator gpumem --log FILE.csv   # record through gpumem
    python3 pytorch_programs.py PROGRAM --allocator pytorch                 # PyTorch's own allocator

PROGRAM is one of:
  gpt_train     a GPT-style decoder (12 layers, d=1024) trained with AdamW under bf16 autocast, batch sizes
                and sequence lengths drawn at random every step (varying shapes)
  llm_generate  the same architecture (6 layers, d=2048, bf16 weights) generating text for a stream of
                requests of random batch size and prompt length; the key/value cache grows by torch.cat at
                every token (inference with growing sequences)
  unet_train    a convolutional U-Net trained under bf16 autocast with batch sizes and image sizes drawn at
                random every step

Three more programs, whose logs are held out (data/held_out/): no default was chosen on them.
  moe_train     a decoder (8 layers, d=768) whose feed-forward layers are mixtures of eight experts, each token
                going to its top two, trained with AdamW under bf16 autocast: every expert sees a data-dependent
                number of tokens at every step
  vit_train     a Vision Transformer (patches of 16 pixels, 12 layers, d=768) trained with AdamW under bf16
                autocast on images whose batch size and side are drawn at random every step
  llm_beam      beam search (four beams; 8 layers, d=1536, bf16 weights) over a key/value cache allocated per
                request for its longest sequence and reordered by index_select, a new copy, at every token

Every program is seeded (seed 0, or --seed), so the allocation sequence is the same under both allocators up to
the rounding PyTorch's own allocator applies to sizes. Another seed draws other batch sizes, sequence lengths
and image sizes: a run of the same program that the logs of data/logs/ (seed 0) do not contain.

--allocator gpumem: PyTorch's allocations go through gpumem's pluggable allocator
(gpumem.allocators.torch_allocator) to a LoggingResourceAdaptor over a CudaAsyncMemoryResource, which writes
every allocate and free to FILE in gpumem's CSV log format (docs/formats.md), ready for `gpumem replay`.
--allocator pytorch: the program runs on PyTorch's caching allocator and reports its peaks.

Prints one JSON line: program, allocator, steps, seconds, and for pytorch max_memory_allocated and
max_memory_reserved (their ratio is PyTorch's reserved / allocated).
"""

import argparse
import json
import random
import sys
import time


def block(torch, d, heads, causal=True, mlp=None):
    """A pre-norm transformer block: self-attention (causal or not), then `mlp()`, a module from d to d (default:
    two linear layers through 4d with GELU). forward(x, cache=None, start=0), where cache is None, a dict (the
    key/value cache, grown by torch.cat) or a tensor [2, rows, heads, longest, d // heads] written in place from
    position `start`; with a cache, one new token attends to everything before it."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            if mlp is not None:
                self.mlp = mlp()
            else:
                self.fc1 = nn.Linear(d, 4 * d)
                self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x, cache=None, start=0):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            is_causal = causal
            if isinstance(cache, dict):
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                    is_causal = False
                cache["k"], cache["v"] = k, v
            elif cache is not None:
                cache[0, :, :, start:start + t] = k
                cache[1, :, :, start:start + t] = v
                k, v = cache[0, :, :, :start + t], cache[1, :, :, :start + t]
                is_causal = t > 1
            y = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            if mlp is not None:
                return x + self.mlp(self.ln2(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))  # each temporary freed as soon as it is used

    return Block()


def gpt(torch, vocab, d, layers, heads, max_seq, mlp=None):
    """A GPT-style decoder of causal blocks (block(), with `mlp`); forward(idx, caches=None, start=0), caches
    one cache per block as block() takes them (a list of dicts, or a tensor [layers, 2, ...]). Also the model
    of benchmarks/python/torch_programs.py."""
    nn = torch.nn

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_seq, d)
            self.blocks = nn.ModuleList(block(torch, d, heads, mlp=mlp) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx, caches=None, start=0):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(start, start + t, device=idx.device))
            for i, layer in enumerate(self.blocks):
                x = layer(x, None if caches is None else caches[i], start)
            return self.head(self.ln(x))

    return GPT()


def optimize(opt, loss):
    """One optimizer step on `loss`, waiting for it (as a training loop that logs its loss does)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    loss.item()


def train_language_model(torch, make_model, vocab, steps, seed, batches, lengths):
    """Trains make_model() (a gpt()) with AdamW under bf16 autocast on random tokens, a batch size and a sequence
    length drawn from `batches` and `lengths` at every step."""
    model = make_model().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    for _ in range(steps):
        batch = rng.choice(batches)
        seq = rng.choice(lengths)
        idx = torch.randint(0, vocab, (batch, seq + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), idx[:, 1:].reshape(-1))
        optimize(opt, loss)
    del model, opt


def gpt_train(torch, steps, seed):
    vocab = 32000
    train_language_model(torch, lambda: gpt(torch, vocab, d=1024, layers=12, heads=16, max_seq=1024), vocab, steps,
                         seed, batches=[4, 8, 16], lengths=[128, 256, 384, 512, 768, 1024])


def llm_generate(torch, steps, seed):
    vocab, max_seq = 32000, 2048
    model = gpt(torch, vocab, d=2048, layers=6, heads=16, max_seq=max_seq).cuda().to(torch.bfloat16).eval()
    rng = random.Random(seed)
    with torch.no_grad():
        for _ in range(steps):  # one request (a batch of prompts) per step
            batch = rng.choice([1, 2, 4, 8, 16])
            prompt = rng.randint(32, 512)
            new_tokens = rng.randint(32, 160)
            idx = torch.randint(0, vocab, (batch, prompt), device="cuda")
            caches = [{} for _ in model.blocks]
            logits = model(idx, caches, 0)
            out = [idx]
            for i in range(new_tokens):
                nxt = logits[:, -1].float().softmax(-1).argmax(-1, keepdim=True)
                out.append(nxt)
                logits = model(nxt, caches, prompt + i)
            torch.cat(out, dim=1).cpu()
            del caches, logits, out
    del model


def unet_train(torch, steps, seed):
    nn = torch.nn

    def conv_block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, widths=(64, 128, 256, 512)):
            super().__init__()
            self.down = nn.ModuleList()
            cin = 3
            for w in widths:
                self.down.append(conv_block(cin, w))
                cin = w
            self.mid = conv_block(widths[-1], widths[-1] * 2)
            self.up = nn.ModuleList()
            self.upconv = nn.ModuleList()
            cin = widths[-1] * 2
            for w in reversed(widths):
                self.upconv.append(nn.ConvTranspose2d(cin, w, 2, stride=2))
                self.up.append(conv_block(2 * w, w))
                cin = w
            self.out = nn.Conv2d(widths[0], 1, 1)

        def forward(self, x):
            skips = []
            for block in self.down:
                x = block(x)
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
            x = self.mid(x)
            for upconv, block, skip in zip(self.upconv, self.up, reversed(skips)):
                x = block(torch.cat([upconv(x), skip], dim=1))
            return self.out(x)

    model = UNet().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    rng = random.Random(seed)
    for _ in range(steps):
        batch = rng.choice([4, 8, 16, 32])
        size = rng.choice([128, 192, 256, 320, 384])
        x = torch.randn(batch, 3, size, size, device="cuda")
        target = torch.rand(batch, 1, size, size, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.binary_cross_entropy_with_logits(model(x).float(), target)
        optimize(opt, loss)
    del model, opt


def moe_train(torch, steps, seed):
    nn = torch.nn
    F = torch.nn.functional
    vocab, d, experts, hidden = 32000, 768, 8, 2048

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(d, experts, bias=False)
            self.up = nn.ModuleList(nn.Linear(d, hidden) for _ in range(experts))
            self.down = nn.ModuleList(nn.Linear(hidden, d) for _ in range(experts))

        def forward(self, x):
            flat = x.reshape(-1, d)
            weights, chosen = torch.topk(self.gate(flat).float().softmax(-1), 2, dim=-1)
            weights = weights / weights.sum(-1, keepdim=True)
            out = torch.zeros(flat.shape, device=flat.device, dtype=torch.float32)
            for e in range(experts):
                rows, slot = torch.nonzero(chosen == e, as_tuple=True)
                if rows.numel() == 0:
                    continue
                y = self.down[e](F.gelu(self.up[e](flat[rows])))
                out = out.index_add(0, rows, y.float() * weights[rows, slot].unsqueeze(-1))
            return out.view(x.shape)

    train_language_model(torch, lambda: gpt(torch, vocab, d=d, layers=8, heads=12, max_seq=1024, mlp=MoE), vocab,
                         steps, seed, batches=[4, 8, 12, 16], lengths=[128, 256, 512, 768, 1024])


def vit_train(torch, steps, seed):
    nn = torch.nn
    F = torch.nn.functional
    d, layers, heads, patch, classes, largest = 768, 12, 12, 16, 1000, 512

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, stride=patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.pos = nn.Parameter(torch.zeros(1, (largest // patch) ** 2 + 1, d))
            self.blocks = nn.ModuleList(block(torch, d, heads, causal=False) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            x = x + self.pos[:, : x.shape[1]]
            for layer in self.blocks:
                x = layer(x)
            return self.head(self.ln(x[:, 0]))

    model = ViT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    for _ in range(steps):
        batch = rng.choice([16, 32, 48, 64])
        side = rng.choice([160, 224, 288, 352, 416, 480])
        x = torch.randn(batch, 3, side, side, device="cuda")
        labels = torch.randint(0, classes, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), labels)
        optimize(opt, loss)
    del model, opt


def llm_beam(torch, steps, seed):
    vocab, d, layers, heads, beams = 32000, 1536, 8, 12, 4
    model = gpt(torch, vocab, d=d, layers=layers, heads=heads, max_seq=1024).cuda().to(torch.bfloat16).eval()
    rng = random.Random(seed)
    with torch.no_grad():
        for _ in range(steps):  # one request (a batch of prompts, four beams each) per step
            batch = rng.choice([1, 2, 4, 8])
            prompt = rng.randint(32, 512)
            new_tokens = rng.randint(16, 96)
            rows = batch * beams
            cache = torch.empty(layers, 2, rows, heads, prompt + new_tokens, d // heads, device="cuda",
                                dtype=torch.bfloat16)
            out = torch.randint(0, vocab, (batch, prompt), device="cuda").repeat_interleave(beams, dim=0)
            logits = model(out, cache, 0)
            scores = torch.zeros(batch, beams, device="cuda")
            scores[:, 1:] = -1e9  # the beams start as copies of one prompt: keep one of them
            first_row = (torch.arange(batch, device="cuda") * beams).unsqueeze(1)
            for i in range(new_tokens):
                logp = logits[:, -1].float().log_softmax(-1).view(batch, beams, vocab)
                scores, best = (scores.unsqueeze(-1) + logp).view(batch, beams * vocab).topk(beams, dim=-1)
                origin = (best // vocab + first_row).view(rows)
                token = (best % vocab).view(rows, 1)
                cache = cache.index_select(2, origin)  # each beam's history, reordered: a new cache
                out = torch.cat([out.index_select(0, origin), token], dim=1)
                logits = model(token, cache, prompt + i)
            out.cpu()
            del cache, logits, out
    del model


PROGRAMS = {"gpt_train": (gpt_train, 40), "llm_generate": (llm_generate, 16), "unet_train": (unet_train, 40),
            "moe_train": (moe_train, 30), "vit_train": (vit_train, 30), "llm_beam": (llm_beam, 16)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", choices=sorted(PROGRAMS))
    parser.add_argument("--allocator", choices=["gpumem", "pytorch"], required=True)
    parser.add_argument("--log", help="the CSV log to write (with --allocator gpumem)")
    parser.add_argument("--steps", type=int, help="steps (default: the program's own)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the program's random choices (default 0)")
    args = parser.parse_args(argv)
    if args.allocator == "gpumem" and not args.log:
        parser.error("--allocator gpumem needs --log FILE")

    import torch

    logger = None
    if args.allocator == "gpumem":
        import gpumem

        logger = gpumem.mr.LoggingResourceAdaptor(gpumem.mr.CudaAsyncMemoryResource(), args.log)
        gpumem.mr.set_current_device_resource(logger)
        torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())

    torch.manual_seed(args.seed)
    function, default_steps = PROGRAMS[args.program]
    steps = args.steps or default_steps
    start = time.perf_counter()
    function(torch, steps, args.seed)
    torch.cuda.synchronize()
    result = {"program": args.program, "allocator": args.allocator, "steps": steps, "seed": args.seed,
              "seconds": round(time.perf_counter() - start, 2)}
    if logger is not None:
        logger.flush()
        result["log"] = args.log
    else:
        result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        result["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        result["reserved_over_allocated"] = round(result["max_memory_reserved"] / result["max_memory_allocated"], 4)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
