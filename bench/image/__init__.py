"""Text-to-image: encoder cost, issue 35's rule for the text query's shortlist and a shallower MiniLM, and the Minimal Test Collections demo."""
