def main() -> None:  # replaced below
    pass
