"""autovec: rewrite Python loops over tensors into batched PyTorch code, without changing
what the program computes."""
from .api import autovec, explain, is_autovec_wrapper
from .runtime import NotVectorizable
from .equivalence import EquivalenceError, assert_equivalent
from .explain import Explanation, LoopReport

__all__ = ["autovec", "explain", "assert_equivalent", "EquivalenceError", "NotVectorizable",
           "Explanation", "LoopReport", "is_autovec_wrapper"]
__version__ = "0.1.0"
