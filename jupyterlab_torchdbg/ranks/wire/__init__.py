"""The wire between the kernel and its worker processes: the signed transport and the
format of what workers say (both sides import it; it imports neither)."""
