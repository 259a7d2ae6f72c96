"""Audio to features: Kaldi fbank (numpy / kaldi-native-fbank, and batched torch) and global CMVN statistics."""
