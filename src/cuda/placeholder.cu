// Placeholder until the first kernel lands.
