-- Score submissions per leaderboard per UTC day, with the players who submitted.
SELECT dt AS day, board_id, COUNT(*) AS submissions, COUNT(DISTINCT user_pid) AS players
FROM rally_events
WHERE event_type = 'score.submitted'
GROUP BY dt, board_id
ORDER BY dt, board_id
