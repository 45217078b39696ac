"""Development and test tools. Nothing here is part of the product's default path."""
