"""The typed settings file, secrets in the keyring, the data/config/cache paths, and the log files."""
