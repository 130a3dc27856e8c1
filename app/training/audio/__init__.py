"""Training audio encoders: `recall train audio` (paper 004's head and paper 000's Siamese MLP on spectrogram or pretrained front-end frames), the texture model, augmentation, batches."""
