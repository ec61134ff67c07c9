"""Files on disk: atomic writes and safe opening (`files`), the run folder's layout (`workspace`), the
workspace lock, and JSON someone else wrote (`jsonsafe`). The floor every stage stands on."""
