"""What the triggers watch: the heads of topics, the consumers behind them, committed-offset readers."""
