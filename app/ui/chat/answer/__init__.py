"""The answer document's parts that serve every document of the process."""
