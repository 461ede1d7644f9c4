"""The model the cache scenarios compile, and the cache switches they set (both caches on, where torch has them)."""
import torch


def cache_settings():
    """Turn the FX-graph and AOTAutograd caches on; return each switch's default and whether it exists here."""
    import torch._functorch.config as fc
    import torch._inductor.config as ic
    out = {"fx_graph_cache_default": getattr(ic, "fx_graph_cache", None)}
    ic.fx_graph_cache = True
    if "enable_autograd_cache" in fc.get_config_copy():
        out["enable_autograd_cache_default"] = fc.enable_autograd_cache
        fc.enable_autograd_cache = True
    else:
        out["enable_autograd_cache_default"] = "absent"
    return out


def model_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return model, torch.randn(8, 16)
