"""Helpers for tests/test_callee_gradients.py: a module whose function reads a global tensor."""
import torch

W = torch.zeros(3)


def scaled(v):
    return v * torch.sqrt(W)


def read_attribute(v):
    return v * torch.sqrt(W)
