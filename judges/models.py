# Judge, JudgeRun and JudgeCall live here (issue: LLM judges through Celery).
