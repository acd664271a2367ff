"""The Qt desktop; only this package imports Qt. At the top: app_main (start-up), MainWindow, the action table and
menu bar (actions), the dialogs the menus open (window_dialogs) and the conversation commands.
controllers/ holds the Qt objects without widgets (the bridge, the engine controller, the chat session),
chat/ the chat's widgets, dialogs/ the dialogs and their tabs."""
