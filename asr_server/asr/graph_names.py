"""The tensor names of the exported graphs (WeNet's, which this project's export keeps), in one place: the
export, the repository builder and the serving code all read them from here."""

OFFLINE_ENCODER_INPUTS = ("speech", "speech_lengths")
OFFLINE_ENCODER_OUTPUTS = ("encoder_out", "encoder_out_lens", "ctc_log_probs", "beam_log_probs", "beam_log_probs_idx")
# The streaming encoder's carried state: input name -> the output that holds its next value.
STREAMING_STATES = {"offset": "r_offset", "att_cache": "r_att_cache", "cnn_cache": "r_cnn_cache",
                    "cache_mask": "r_cache_mask"}
STREAMING_ENCODER_INPUTS = ("chunk_xs", "chunk_lens", *STREAMING_STATES)
STREAMING_ENCODER_OUTPUTS = ("log_probs", "log_probs_idx", "chunk_out", "chunk_out_lens")  # before the states
