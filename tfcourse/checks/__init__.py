"""Exercise checks, one module per lesson. Test cells call them with the learner's object."""

from .core import CheckFailed, OffLimitsError, compare, off_limits
from .ffn import check_feed_forward

__all__ = ["CheckFailed", "OffLimitsError", "compare", "off_limits", "check_feed_forward"]
