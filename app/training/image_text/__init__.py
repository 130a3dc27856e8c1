"""Training the text-to-image encoder (paper 003's block network): `recall train image-text`, its data and its report."""
