-- Daily active players: distinct players with any event, per UTC day.
SELECT dt AS day, COUNT(DISTINCT user_pid) AS players
FROM rally_events
GROUP BY dt
ORDER BY dt
