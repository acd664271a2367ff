"""Qt-free domain code: settings, paths, model preparation, text splitting."""
