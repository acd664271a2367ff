"""The chat's widgets: thread, conversation list, thinking and answer panes, reply controls, the Think
switch, tool cards, gauges and the status bar."""
