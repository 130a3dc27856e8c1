"""Audio encoder families: paper 004's attn-hash, paper 000's Siamese MLP, the sound-texture model, general-audio's routed fusion and its speech views, and the networks and MFCC they share."""
