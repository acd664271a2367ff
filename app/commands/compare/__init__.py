"""`nalar bench compare`: a Compare's variants run at once on one engine, against the same run one after another."""
