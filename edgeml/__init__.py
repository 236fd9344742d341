"""edgeml: reproduce and compare distributed training schemes across heterogeneous edge devices."""

__version__ = "0.1.0"
