"""The thread above the live reply: its turns' markup, and which of them the transcript draws."""
