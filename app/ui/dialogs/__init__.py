"""Dialogs and their tabs: settings, backends, tools, measure (with its job panel and saturation tab),
and the first-run welcome."""
