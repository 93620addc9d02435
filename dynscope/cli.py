"""Command line."""
def main(argv=None) -> int:
    return 0
