"""Kernels for the tpu device that other libraries' custom ops dispatch to (torchvision)."""
