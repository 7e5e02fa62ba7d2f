"""The pass manager (verify, time and dump each pass) and the default pipeline."""
