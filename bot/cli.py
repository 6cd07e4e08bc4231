"""The gpuops console script."""


def main() -> None:
    raise SystemExit("gpuops: starting")
