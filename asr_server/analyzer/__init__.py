"""asr-model-analyzer: find a model's (or a whole ensemble's) best configuration by measurement.

The pieces, each with one job:
    variants     -- the knobs a search turns (instances, batch sizes, queue delay, oldest-strategy settings)
                    applied to a Triton ModelConfig
    server       -- our server started on a copy of the repository, or a running one; loads candidate configs
    perf         -- NVIDIA's perf_analyzer as the load generator (concurrency, request rate, sequences)
    audio_data   -- perf_analyzer --input-data JSON made of real audio for the ASR ensembles
    paced        -- paced real-time streams (what perf_analyzer cannot do), with final-transcript latency
    objectives   -- what "best" means: throughput, p99 latency or paced streams, under constraints
    search       -- brute force over a grid, and hill climbing
    checkpoint   -- measured points on disk, so a run resumes where it stopped
    results      -- metrics-model-inference.csv in Triton Model Analyzer's columns
    report       -- throughput-vs-p99 plots and an HTML summary
    run          -- the loop that ties them together; cli -- the console script
"""
