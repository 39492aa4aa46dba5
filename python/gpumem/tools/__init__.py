"""gpumem.tools: command-line helpers that run as ``python3 -m gpumem.tools.<name>``.

- ``torch_snapshot``: converts a PyTorch memory snapshot (``torch.cuda.memory._dump_snapshot``) into gpumem's
  allocation log (RMM's CSV), for ``gpumem replay`` and ``gpumem report``.

The tools are not imported with the package (``python3 -m`` runs a module that is not yet imported).
"""
