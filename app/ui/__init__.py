"""The Qt desktop UI. Only this package imports Qt."""
