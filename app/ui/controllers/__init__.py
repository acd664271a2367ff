"""Qt objects with no widgets: the one bridge from engine events to throttled signals, the engine
controller, the chat session, the tool loop and the tools controller."""
