"""pytest plugin: placeholder until the budget plugin lands (see issue 5)."""
