"""patchtool: carry a curated series of downstream patches on a fast-moving upstream."""

__version__ = "0.1.0"
