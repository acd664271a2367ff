"""`nalar models`: search the hub with this machine's fit verdicts, list the library, delete a model."""
