"""FlexAttention (``torch.nn.attention.flex_attention``) on the tpu device.

PyTorch refuses tpu tensors at the door of ``flex_attention`` ("only supported on CUDA, CPU or HPU
devices"), a device allow-list, not a missing kernel: uncompiled, ``flex_attention`` runs its
higher-order op's dense implementation (the scores materialized, ``score_mod`` and the block mask
applied by ``vmap``, a softmax, and autograd's formulas for the backward), made of ATen ops that
tpu lowers. patches.py lets tpu tensors through that check; every other device is
checked by PyTorch's own code, and CPU keeps refusing gradients as it does.
"""


def validate_device_or_tpu(validate_device):
    """flex_attention's device check letting tpu tensors through (installed by patches.py)."""
    def _validate_device(query, key, value):
        if query.device.type != "tpu":
            validate_device(query, key, value)
    return _validate_device
