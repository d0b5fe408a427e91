"""Ready-made policies. ``ALLOW_ALL`` allows every call, explicitly and fingerprinted."""

from sealbox.policy import ALLOW_ALL, Policy

__all__ = ["ALLOW_ALL", "Policy"]
