"""torch's extension autoload entry point (group "torch.backends"): `import torch` imports
tutti_torch, so `dist.init_process_group("tutti")` works without `import tutti_torch`.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns torch's autoloading off."""


def load():
    import tutti_torch  # noqa: F401  (registers the backend; mid-import when it imported torch)
