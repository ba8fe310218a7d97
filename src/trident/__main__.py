from trident.cli import entry

entry()
