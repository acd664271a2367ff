"""`nalar knowledge …`: knowledge collections from a terminal (add, sync, list, search, rm), and `nalar bench
knowledge`."""
