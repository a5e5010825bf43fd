"""`ray.tune.result`: the names of the keys Tune adds to every result."""

DEFAULT_METRIC = "_metric"  # what a trainable returning a bare number reports
TRAINING_ITERATION = "training_iteration"
TIME_TOTAL_S = "time_total_s"
TIME_THIS_ITER_S = "time_this_iter_s"
TIMESTAMP = "timestamp"
DONE = "done"
TRIAL_ID = "trial_id"
EXPERIMENT_TAG = "experiment_tag"
CONFIG_PREFIX = "config"
NODE_IP = "node_ip"
PID = "pid"
HOSTNAME = "hostname"
SHOULD_CHECKPOINT = "should_checkpoint"
DEFAULT_RESULT_KEYS = (TRAINING_ITERATION, TIME_TOTAL_S, TIMESTAMP)
AUTO_RESULT_KEYS = (TRAINING_ITERATION, TIME_TOTAL_S, TIME_THIS_ITER_S, TIMESTAMP, DONE,
                    TRIAL_ID, EXPERIMENT_TAG, NODE_IP, PID, HOSTNAME, "date",
                    "iterations_since_restore", "time_since_restore", "checkpoint_dir_name")
EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"
EXPR_RESULT_FILE = "result.json"
EXPR_PROGRESS_FILE = "progress.csv"
EXPR_ERROR_FILE = "error.txt"
