"""`hami serve`'s command line, parsed as the process parses it."""

import argparse

from hami.runtime.settingsload import add_serve_arguments


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))
