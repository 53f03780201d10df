"""Configuration of `hami serve`: flags, environment (HAMI_*) and an optional YAML file."""

import argparse


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file with the same settings (flags win)")
