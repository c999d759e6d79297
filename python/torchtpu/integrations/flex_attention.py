"""FlexAttention (``torch.nn.attention.flex_attention``) on the tpu device.

PyTorch refuses tpu tensors at the door of ``flex_attention`` ("only supported on CUDA, CPU or HPU
devices"), a device allow-list, not a missing kernel: uncompiled, ``flex_attention`` runs its
higher-order op's dense implementation (the scores materialized, ``score_mod`` and the block mask
applied by ``vmap``, a softmax, and autograd's formulas for the backward), made of ATen ops that
tpu lowers. Importing this module lets tpu tensors through that check; every other device is
checked by PyTorch's own code, and CPU keeps refusing gradients as it does.
"""

import torch.nn.attention.flex_attention as _flex

_validate_device = _flex._validate_device


def _validate_device_or_tpu(query, key, value):
    if query.device.type != "tpu":
        _validate_device(query, key, value)


_flex._validate_device = _validate_device_or_tpu
