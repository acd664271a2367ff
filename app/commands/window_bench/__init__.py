"""`nalar bench ui` and the window benches' shared harness (the hostile bench uses it too)."""
