"""Model zoo: small target/draft pairs trained here on the Python stdlib's own sources."""

from real_backend.zoo.build import build, default_cache_dir, read_card, resolve_zoo_model
from real_backend.zoo.cli import add_zoo_parser, zoo_command
from real_backend.zoo.specs import SPECS, ModelShape, TrainSpec, ZooSpec, get_spec

__all__ = [
    "SPECS",
    "ModelShape",
    "TrainSpec",
    "ZooSpec",
    "add_zoo_parser",
    "build",
    "default_cache_dir",
    "get_spec",
    "read_card",
    "resolve_zoo_model",
    "zoo_command",
]
