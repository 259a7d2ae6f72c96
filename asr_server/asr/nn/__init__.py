"""Neural-network building blocks of the U2++ conformer, named like WeNet's so its state_dicts load."""
