"""Text-to-image: encoder cost, and the Minimal Test Collections demo."""
