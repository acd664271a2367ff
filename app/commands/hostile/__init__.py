"""`nalar bench hostile`: each hostile input of the safety rounds, handled by the real window."""
