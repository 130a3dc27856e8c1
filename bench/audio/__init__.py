"""Audio quality and cost: generalisation to unseen data, leave-one-corpus-out, localisation, routing, encoder cost."""
