"""tfcourse: the reference Transformer that the course's exercises are checked against."""

__version__ = "0.1.0"
