"""Rules as data: loading, compiling and evaluating CEL rules, the user's configuration, the catalogue."""
