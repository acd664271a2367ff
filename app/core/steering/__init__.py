"""Steering the reasoning, over conversations: pause, edit and resume the thinking, Compare's variants side by
side, and earlier thinking kept in context. Qt-free; the window observes it."""
