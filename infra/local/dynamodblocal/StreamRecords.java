// StreamRecords gives DynamoDB Local's stream records a key that SQLite
// can seek by stream (see streamRecords in dynamodblocal.go). It runs on
// the database file with the SQLite binding DynamoDB Local itself ships
// (sqlite4java), so the file is written by the very SQLite version that
// reads it. The Go package dynamodblocal launches it as a single source
// file, once DynamoDB Local has made its tables:
//
//     java -cp DynamoDBLocal_lib/sqlite4java.jar StreamRecords.java DB
import com.almworks.sqlite4java.SQLiteConnection;
import com.almworks.sqlite4java.SQLiteStatement;
import java.io.File;
import java.util.logging.Level;
import java.util.logging.Logger;

public class StreamRecords {
    static final String[] REKEY = {
        "BEGIN IMMEDIATE",
        // As DynamoDB Local makes it, but the sequence number an INT:
        // a key of its own rather than the rowid, which an index can
        // range over.
        "CREATE TABLE rally_us (StreamID TEXT, ShardID TEXT, SequenceNumber INT, CreationDateTime INTEGER,"
            + " StreamRecord BLOB, OperationType TEXT, PRIMARY KEY(SequenceNumber))",
        "INSERT INTO rally_us (StreamID, ShardID, SequenceNumber, CreationDateTime, StreamRecord, OperationType)"
            + " SELECT StreamID, ShardID, SequenceNumber, CreationDateTime, StreamRecord, OperationType FROM us",
        "DROP TABLE us",
        "ALTER TABLE rally_us RENAME TO us",
        "CREATE INDEX rally_us_stream ON us (StreamID, SequenceNumber)",
        "CREATE INDEX rally_us_shard ON us (ShardID, SequenceNumber)",
        "COMMIT",
    };

    public static void main(String[] args) throws Exception {
        Logger.getLogger("com.almworks.sqlite4java").setLevel(Level.OFF);
        SQLiteConnection db = new SQLiteConnection(new File(args[0]));
        db.open(false);
        try {
            // DynamoDB Local holds the file open; wait out a write of its own.
            db.setBusyTimeout(30_000);
            SQLiteStatement done = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'rally_us_shard'");
            boolean rekeyed = done.step();
            done.dispose();
            if (!rekeyed) {
                for (String sql : REKEY) {
                    db.exec(sql);
                }
            }
        } finally {
            db.dispose();
        }
    }
}
